module fifo_sync (
    input  logic       clk, rst, push, pop,
    input  logic [7:0] din,
    output logic [7:0] dout,
    output logic       full, empty,
    output logic [2:0] count
);
  logic [7:0] mem[4];
  logic [1:0] wp, rp;
  logic do_push, do_pop;
  assign do_push = push && !full;
  assign do_pop = pop && !empty;
  always_ff @(posedge clk) begin
    if (rst) begin
      wp <= 2'd0;
      rp <= 2'd0;
      count <= 3'd0;
    end else begin
      if (do_push) begin
        mem[wp] <= din;
        wp <= wp + 2'd1;
      end
      if (do_pop) rp <= rp + 2'd1;
      case ({do_push, do_pop})
        2'b10: count <= count + 3'd1;
        2'b01: count <= count - 3'd1;
        default: count <= count;
      endcase
    end
  end
  assign dout = mem[rp];
  assign full = (count == 3'd4);
  assign empty = (count == 3'd0);
endmodule
