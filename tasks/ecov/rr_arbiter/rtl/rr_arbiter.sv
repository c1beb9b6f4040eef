module rr_arbiter (
    input  logic       clk, rst,
    input  logic [3:0] req,
    output logic [3:0] grant
);
  logic [1:0] last;
  logic [1:0] pick;
  logic found;
  always_comb begin
    found = 1'b0;
    pick = last;
    for (int i = 1; i <= 4; i++) begin
      if (!found && req[(last + i) % 4]) begin
        found = 1'b1;
        pick = 2'((last + i) % 4);
      end
    end
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      grant <= 4'd0;
      last <= 2'd3;
    end else if (found) begin
      grant <= 4'b1 << pick;
      last <= pick;
    end else begin
      grant <= 4'd0;
    end
  end
endmodule
