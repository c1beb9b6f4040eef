// CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, MSB first, no reflection, no final xor),
// one byte accepted at a time and folded in bit-serially over 8 cycles.
module crc16_ccitt (
    input  logic        clk, rst,
    input  logic        init,
    input  logic        data_valid,
    input  logic [7:0]  data,
    output logic [15:0] crc,
    output logic        busy,
    output logic        overrun,
    output logic        zero
);
  logic [7:0] shreg;
  logic [2:0] nbit;
  logic fb;
  assign fb = crc[15] ^ shreg[7];
  always_ff @(posedge clk) begin
    if (rst) begin
      crc <= 16'hFFFF;
      shreg <= 8'd0;
      nbit <= 3'd0;
      busy <= 1'b0;
      overrun <= 1'b0;
    end else if (init) begin
      // restart: also aborts a byte in progress and clears the overrun flag
      crc <= 16'hFFFF;
      nbit <= 3'd0;
      busy <= 1'b0;
      overrun <= 1'b0;
    end else begin
      if (data_valid) begin
        if (busy) overrun <= 1'b1;   // the byte is dropped
        else begin
          shreg <= data;
          nbit <= 3'd0;
          busy <= 1'b1;
        end
      end
      if (busy) begin
        if (fb) crc <= {crc[14:0], 1'b0} ^ 16'h1021;
        else crc <= {crc[14:0], 1'b0};
        shreg <= {shreg[6:0], 1'b0};
        nbit <= nbit + 3'd1;
        if (nbit == 3'd7) busy <= 1'b0;
      end
    end
  end
  assign zero = (crc == 16'h0000) && !busy;
endmodule
