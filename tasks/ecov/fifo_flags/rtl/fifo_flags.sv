module fifo_flags (
    input  logic       clk, rst, push, pop,
    input  logic [7:0] din,
    output logic [7:0] dout,
    output logic       full, empty, almost_full, almost_empty, overflow, underflow
);
  logic [7:0] mem[4];
  logic [1:0] wp, rp;
  logic [2:0] count;
  logic [7:0] bypass_q;
  logic bypass;
  always_ff @(posedge clk) begin
    if (rst) begin
      wp <= 2'd0;
      rp <= 2'd0;
      count <= 3'd0;
      overflow <= 1'b0;
      underflow <= 1'b0;
      bypass <= 1'b0;
      bypass_q <= 8'd0;
    end else begin
      bypass <= 1'b0;
      if (push && pop && empty) begin
        bypass <= 1'b1;
        bypass_q <= din;
      end else if (push && pop) begin
        mem[wp] <= din;
        wp <= wp + 2'd1;
        rp <= rp + 2'd1;
      end else if (push) begin
        if (full) overflow <= 1'b1;
        else begin
          mem[wp] <= din;
          wp <= wp + 2'd1;
          count <= count + 3'd1;
        end
      end else if (pop) begin
        if (empty) underflow <= 1'b1;
        else begin
          rp <= rp + 2'd1;
          count <= count - 3'd1;
        end
      end
    end
  end
  assign dout = bypass ? bypass_q : mem[rp];
  assign full = (count == 3'd4);
  assign empty = (count == 3'd0);
  assign almost_full = (count == 3'd3);
  assign almost_empty = (count == 3'd1);
  // corner cases (SystemVerilog cover points, collected with --coverage-user)
  cover_push_pop_full: cover property (@(posedge clk) disable iff (rst) full && push && pop);
  cover_push_full: cover property (@(posedge clk) disable iff (rst) full && push && !pop);
  cover_push_pop_empty: cover property (@(posedge clk) disable iff (rst) empty && push && pop);
  cover_fill_last: cover property (@(posedge clk) disable iff (rst) almost_full && push && !pop);
  cover_drain_last: cover property (@(posedge clk) disable iff (rst) almost_empty && pop && !push);
endmodule
