module hamming_secded (
    input  logic       clk, rst, valid,
    input  logic [7:0] code,
    output logic [3:0] data,
    output logic       corrected, uncorrectable
);
  logic [2:0] s;
  logic pe;
  logic [6:0] fixed;
  assign s[0] = code[0] ^ code[2] ^ code[4] ^ code[6];
  assign s[1] = code[1] ^ code[2] ^ code[5] ^ code[6];
  assign s[2] = code[3] ^ code[4] ^ code[5] ^ code[6];
  assign pe = ^code;
  always_comb begin
    fixed = code[6:0];
    if (pe && s != 3'd0) fixed[s - 3'd1] = ~code[s - 3'd1];
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      data <= 4'd0;
      corrected <= 1'b0;
      uncorrectable <= 1'b0;
    end else if (valid) begin
      data <= {fixed[6], fixed[5], fixed[4], fixed[2]};
      if (!pe && s == 3'd0) begin
        corrected <= 1'b0;
        uncorrectable <= 1'b0;
      end else if (pe) begin
        corrected <= 1'b1;
        uncorrectable <= 1'b0;
      end else begin
        corrected <= 1'b0;
        uncorrectable <= 1'b1;
      end
    end
  end
endmodule
