module regfile_bypass (
    input  logic       clk, rst, we,
    input  logic [1:0] waddr, raddr_a, raddr_b,
    input  logic [7:0] wdata,
    output logic [7:0] rdata_a, rdata_b
);
  logic [7:0] regs[4];
  always_ff @(posedge clk) begin
    if (rst) begin
      for (int i = 0; i < 4; i++) regs[i] <= 8'd0;
    end else if (we && waddr != 2'd0) begin
      regs[waddr] <= wdata;
    end
  end
  // read port A: register 0 is hard-wired to zero, a same-cycle write is forwarded
  always_comb begin
    if (raddr_a == 2'd0) rdata_a = 8'd0;
    else if (we && raddr_a == waddr) rdata_a = wdata;
    else rdata_a = regs[raddr_a];
  end
  // read port B: same rules as port A
  always_comb begin
    if (raddr_b == 2'd0) rdata_b = 8'd0;
    else if (we && raddr_b == waddr) rdata_b = wdata;
    else rdata_b = regs[raddr_b];
  end
endmodule
