module seq_multiplier (
    input  logic        clk, rst, start,
    input  logic [7:0]  a, b,
    output logic [15:0] product,
    output logic        busy, done
);
  logic [15:0] mcand;
  logic [7:0] mplier;
  logic [3:0] steps;
  always_ff @(posedge clk) begin
    if (rst) begin
      busy <= 1'b0;
      done <= 1'b0;
      product <= 16'd0;
      steps <= 4'd0;
    end else begin
      done <= 1'b0;
      if (!busy) begin
        if (start) begin
          if (a == 8'd0 || b == 8'd0) begin
            product <= 16'd0;
            done <= 1'b1;
          end else begin
            mcand <= {8'd0, a};
            mplier <= b;
            product <= 16'd0;
            steps <= 4'd0;
            busy <= 1'b1;
          end
        end
      end else begin
        if (mplier[0]) product <= product + mcand;
        mcand <= mcand << 1;
        mplier <= mplier >> 1;
        steps <= steps + 4'd1;
        if (steps == 4'd7) begin
          busy <= 1'b0;
          done <= 1'b1;
        end
      end
    end
  end
endmodule
