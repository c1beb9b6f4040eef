module prio_encoder (
    input  logic       clk, rst,
    input  logic [3:0] req,
    output logic [1:0] idx,
    output logic       valid
);
  always_ff @(posedge clk) begin
    if (rst) begin
      idx <= 2'd0;
      valid <= 1'b0;
    end else begin
      valid <= |req;
      if (req[3]) idx <= 2'd3;
      else if (req[2]) idx <= 2'd2;
      else if (req[1]) idx <= 2'd1;
      else idx <= 2'd0;
    end
  end
endmodule
