module seq_detect_1011 (
    input  logic       clk, rst, din,
    output logic       found,
    output logic [3:0] count
);
  typedef enum logic [1:0] {S0, S1, S10, S101} state_t;
  state_t state;
  logic hit;
  always_comb begin
    hit = (state == S101) && din;
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S0;
      found <= 1'b0;
      count <= 4'd0;
    end else begin
      found <= hit;
      if (hit && count != 4'hf) count <= count + 4'd1;
      case (state)
        S0: state <= din ? S1 : S0;
        S1: state <= din ? S1 : S10;
        S10: state <= din ? S101 : S0;
        S101: state <= din ? S1 : S10;
      endcase
    end
  end
endmodule
