module combo_lock (
    input  logic       clk, rst, key_valid,
    input  logic [3:0] key,
    output logic       open, lockout,
    output logic [1:0] fails
);
  logic [1:0] pos;
  logic [3:0] expected;
  always_comb begin
    case (pos)
      2'd0: expected = 4'd3;
      2'd1: expected = 4'd1;
      2'd2: expected = 4'd4;
      default: expected = 4'd1;
    endcase
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      pos <= 2'd0;
      open <= 1'b0;
      lockout <= 1'b0;
      fails <= 2'd0;
    end else if (key_valid && !lockout && !open) begin
      if (key == expected) begin
        if (pos == 2'd3) open <= 1'b1;
        else pos <= pos + 2'd1;
      end else begin
        pos <= (key == 4'd3) ? 2'd1 : 2'd0;
        if (fails == 2'd2) lockout <= 1'b1;
        fails <= fails + 2'd1;
      end
    end
  end
  // interesting sequences (SystemVerilog cover points, collected with --coverage-user)
  cover_open_after_fail: cover property (@(posedge clk) disable iff (rst)
      key_valid && !lockout && !open && pos == 2'd3 && key == 4'd1 && fails != 2'd0);
  cover_restart_on_3: cover property (@(posedge clk) disable iff (rst)
      key_valid && !lockout && !open && pos != 2'd0 && key != expected && key == 4'd3);
  cover_key_in_lockout: cover property (@(posedge clk) disable iff (rst) key_valid && lockout);
endmodule
