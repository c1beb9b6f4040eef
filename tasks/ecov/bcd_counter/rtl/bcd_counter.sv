module bcd_counter (
    input  logic       clk, rst, inc,
    output logic [3:0] digit,
    output logic       carry
);
  always_ff @(posedge clk) begin
    if (rst) begin
      digit <= 4'd0;
      carry <= 1'b0;
    end else if (inc) begin
      if (digit == 4'd9) begin
        digit <= 4'd0;
        carry <= 1'b1;
      end else begin
        digit <= digit + 4'd1;
        carry <= 1'b0;
      end
    end else begin
      carry <= 1'b0;
    end
  end
endmodule
