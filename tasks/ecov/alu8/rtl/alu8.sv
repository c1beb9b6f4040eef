module alu8 (
    input  logic       clk, rst, valid,
    input  logic [2:0] op,
    input  logic [7:0] a, b,
    output logic [7:0] y,
    output logic       zero, carry, overflow, negative
);
  logic [8:0] r, sum, diff;
  logic v, sa, sb;
  assign sa = a[7];
  assign sb = b[7];
  assign sum = {1'b0, a} + {1'b0, b};
  assign diff = {1'b0, a} + {1'b0, ~b} + 9'd1;
  always_comb begin
    v = 1'b0;
    case (op)
      3'd0: begin
        r = sum;
        v = (sa == sb) && (sum[7] != sa);
      end
      3'd1, 3'd7: begin
        r = diff;
        v = (sa != sb) && (diff[7] != sa);
      end
      3'd2: r = {1'b0, a & b};
      3'd3: r = {1'b0, a | b};
      3'd4: r = {1'b0, a ^ b};
      3'd5: r = {a[7], a[6:0], 1'b0};
      default: r = {a[0], 1'b0, a[7:1]};
    endcase
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      y <= 8'd0;
      {zero, carry, overflow, negative} <= 4'd0;
    end else if (valid) begin
      if (op != 3'd7) y <= r[7:0];
      zero <= (r[7:0] == 8'd0);
      carry <= r[8];
      overflow <= v;
      negative <= r[7];
    end
  end
endmodule
