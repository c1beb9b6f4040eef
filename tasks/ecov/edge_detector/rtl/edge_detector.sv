module edge_detector (
    input  logic clk, rst, sig,
    output logic rise, fall, level
);
  always_ff @(posedge clk) begin
    if (rst) begin
      level <= 1'b0;
      rise <= 1'b0;
      fall <= 1'b0;
    end else begin
      level <= sig;
      rise <= sig & ~level;
      fall <= ~sig & level;
    end
  end
endmodule
