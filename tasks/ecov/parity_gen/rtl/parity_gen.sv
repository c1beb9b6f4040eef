module parity_gen (
    input  logic       clk, rst, odd, valid, check_bit,
    input  logic [7:0] data,
    output logic       parity, error
);
  logic p;
  assign p = odd ? ~(^data) : ^data;
  always_ff @(posedge clk) begin
    if (rst) begin
      parity <= 1'b0;
      error <= 1'b0;
    end else if (valid) begin
      parity <= p;
      if (check_bit != p) error <= 1'b1;
      else error <= 1'b0;
    end
  end
endmodule
