module counter_align (
    input  logic       clk, rst, run, arm,
    output logic [2:0] a, b,
    output logic       aligned,
    output logic [3:0] event_count
);
  logic started;
  always_ff @(posedge clk) begin
    if (rst) begin
      a <= 3'd0;
      b <= 3'd0;
      aligned <= 1'b0;
      started <= 1'b0;
      event_count <= 4'd0;
    end else if (run) begin
      started <= 1'b1;
      a <= (a == 3'd6) ? 3'd0 : a + 3'd1;
      b <= (b == 3'd4) ? 3'd0 : b + 3'd1;
      if (started && a == 3'd6 && b == 3'd4) begin
        aligned <= 1'b1;
        if (arm && event_count != 4'hf) event_count <= event_count + 4'd1;
      end else begin
        aligned <= 1'b0;
      end
    end
  end
endmodule
