module cam4 (
    input  logic       clk, rst, we, search,
    input  logic [1:0] waddr,
    input  logic [7:0] wkey, skey,
    output logic       hit, multi,
    output logic [1:0] hit_idx
);
  logic [7:0] keys[4];
  logic [3:0] valid, match;
  always_comb begin
    for (int i = 0; i < 4; i++) match[i] = valid[i] && keys[i] == skey;
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      valid <= 4'd0;
      hit <= 1'b0;
      multi <= 1'b0;
      hit_idx <= 2'd0;
    end else begin
      if (we) begin
        keys[waddr] <= wkey;
        valid[waddr] <= 1'b1;
      end
      if (search) begin
        hit <= |match;
        multi <= (match & (match - 4'd1)) != 4'd0;
        if (match[0]) hit_idx <= 2'd0;
        else if (match[1]) hit_idx <= 2'd1;
        else if (match[2]) hit_idx <= 2'd2;
        else hit_idx <= 2'd3;
      end
    end
  end
endmodule
