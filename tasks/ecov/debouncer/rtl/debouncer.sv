module debouncer (
    input  logic clk, rst, noisy,
    output logic clean, press
);
  logic [2:0] stable;
  always_ff @(posedge clk) begin
    if (rst) begin
      clean <= 1'b0;
      stable <= 3'd0;
      press <= 1'b0;
    end else begin
      press <= 1'b0;
      if (noisy == clean) begin
        stable <= 3'd0;
      end else if (stable == 3'd7) begin
        clean <= noisy;
        stable <= 3'd0;
        if (noisy) press <= 1'b1;
      end else begin
        stable <= stable + 3'd1;
      end
    end
  end
endmodule
