module updown_counter (
    input  logic       clk, rst, en, up,
    output logic [3:0] q,
    output logic       at_top, at_bottom
);
  always_ff @(posedge clk) begin
    if (rst) q <= 4'd0;
    else if (en) begin
      if (up) begin
        if (q != 4'hf) q <= q + 4'd1;
      end else begin
        if (q != 4'h0) q <= q - 4'd1;
      end
    end
  end
  assign at_top = (q == 4'hf);
  assign at_bottom = (q == 4'h0);
endmodule
