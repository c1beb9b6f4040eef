module clock_divider (
    input  logic       clk, rst,
    input  logic [1:0] sel,
    output logic       tick
);
  logic [3:0] count, limit;
  logic [1:0] last_sel;
  always_comb begin
    case (sel)
      2'd0: limit = 4'd1;
      2'd1: limit = 4'd3;
      2'd2: limit = 4'd7;
      default: limit = 4'd15;
    endcase
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      count <= 4'd0;
      tick <= 1'b0;
      last_sel <= 2'd0;
    end else begin
      last_sel <= sel;
      if (sel != last_sel) begin
        count <= 4'd0;
        tick <= 1'b0;
      end else if (count == limit) begin
        count <= 4'd0;
        tick <= 1'b1;
      end else begin
        count <= count + 4'd1;
        tick <= 1'b0;
      end
    end
  end
endmodule
