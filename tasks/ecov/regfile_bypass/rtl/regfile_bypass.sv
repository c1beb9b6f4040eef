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
  function automatic logic [7:0] read(input logic [1:0] addr);
    if (addr == 2'd0) return 8'd0;
    else if (we && addr == waddr) return wdata;
    else return regs[addr];
  endfunction
  assign rdata_a = read(raddr_a);
  assign rdata_b = read(raddr_b);
endmodule
