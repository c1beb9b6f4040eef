module gray_codec (
    input  logic       clk, rst, mode,
    input  logic [3:0] din,
    output logic [3:0] dout
);
  logic [3:0] to_bin;
  always_comb begin
    to_bin[3] = din[3];
    to_bin[2] = to_bin[3] ^ din[2];
    to_bin[1] = to_bin[2] ^ din[1];
    to_bin[0] = to_bin[1] ^ din[0];
  end
  always_ff @(posedge clk) begin
    if (rst) dout <= 4'd0;
    else if (mode) dout <= to_bin;
    else dout <= din ^ (din >> 1);
  end
endmodule
