module sipo_shift (
    input  logic       clk, rst, shift_en, sin,
    output logic [7:0] pout,
    output logic       frame
);
  logic [2:0] count;
  always_ff @(posedge clk) begin
    if (rst) begin
      pout <= 8'd0;
      count <= 3'd0;
      frame <= 1'b0;
    end else if (shift_en) begin
      pout <= {pout[6:0], sin};
      count <= count + 3'd1;
      frame <= (count == 3'd7);
    end else begin
      frame <= 1'b0;
    end
  end
endmodule
