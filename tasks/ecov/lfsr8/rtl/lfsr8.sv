module lfsr8 (
    input  logic       clk, rst, seed_we, step,
    input  logic [7:0] seed,
    output logic [7:0] state,
    output logic       locked
);
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= 8'h01;
      locked <= 1'b0;
    end else if (seed_we) begin
      if (seed == 8'h00) begin
        state <= 8'h01;
        locked <= 1'b1;
      end else begin
        state <= seed;
      end
    end else if (step) begin
      if (state[0]) state <= (state >> 1) ^ 8'hB8;
      else state <= state >> 1;
    end
  end
endmodule
