module up_counter (
    input  logic       clk, rst, en, load,
    input  logic [7:0] din,
    output logic [7:0] q,
    output logic       max
);
  always_ff @(posedge clk) begin
    if (rst) q <= 8'd0;
    else if (load) q <= din;
    else if (en) q <= q + 8'd1;
  end
  assign max = (q == 8'hff);
endmodule
