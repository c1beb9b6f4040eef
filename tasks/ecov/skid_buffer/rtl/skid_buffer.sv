module skid_buffer (
    input  logic       clk, rst, in_valid, out_ready,
    input  logic [7:0] in_data,
    output logic       in_ready, out_valid,
    output logic [7:0] out_data
);
  logic [7:0] skid;
  logic skid_valid;
  assign in_ready = !skid_valid;
  always_ff @(posedge clk) begin
    if (rst) begin
      out_valid <= 1'b0;
      skid_valid <= 1'b0;
      out_data <= 8'd0;
      skid <= 8'd0;
    end else begin
      if (out_ready || !out_valid) begin
        if (skid_valid) begin
          out_data <= skid;
          out_valid <= 1'b1;
          skid_valid <= 1'b0;
        end else if (in_valid) begin
          out_data <= in_data;
          out_valid <= 1'b1;
        end else begin
          out_valid <= 1'b0;
        end
      end else if (in_valid && in_ready) begin
        skid <= in_data;
        skid_valid <= 1'b1;
      end
    end
  end
endmodule
