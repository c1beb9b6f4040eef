module pwm_gen (
    input  logic       clk, rst,
    input  logic [7:0] duty,
    output logic       pwm, period_end
);
  logic [7:0] count, active;
  always_ff @(posedge clk) begin
    if (rst) begin
      count <= 8'd0;
      active <= 8'd0;
    end else begin
      count <= count + 8'd1;
      if (count == 8'hff) active <= duty;
    end
  end
  assign period_end = (count == 8'hff);
  assign pwm = (count < active);
endmodule
