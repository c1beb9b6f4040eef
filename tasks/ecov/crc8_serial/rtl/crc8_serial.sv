module crc8_serial (
    input  logic       clk, rst, clear, bit_valid, din,
    output logic [7:0] crc,
    output logic       zero
);
  logic fb;
  assign fb = crc[7] ^ din;
  always_ff @(posedge clk) begin
    if (rst || clear) crc <= 8'd0;
    else if (bit_valid) begin
      if (fb) crc <= {crc[6:0], 1'b0} ^ 8'h07;
      else crc <= {crc[6:0], 1'b0};
    end
  end
  assign zero = (crc == 8'd0);
endmodule
