module seq_divider (
    input  logic       clk, rst, start,
    input  logic [7:0] dividend, divisor,
    output logic [7:0] quotient, remainder,
    output logic       busy, done, div_by_zero
);
  logic [8:0] rem;
  logic [7:0] quo, dvs;
  logic [3:0] steps;
  logic [8:0] trial;
  assign trial = {rem[7:0], quo[7]} - {1'b0, dvs};
  always_ff @(posedge clk) begin
    if (rst) begin
      busy <= 1'b0;
      done <= 1'b0;
      div_by_zero <= 1'b0;
      quotient <= 8'd0;
      remainder <= 8'd0;
    end else begin
      done <= 1'b0;
      if (!busy) begin
        if (start) begin
          if (divisor == 8'd0) begin
            div_by_zero <= 1'b1;
            quotient <= 8'hff;
            remainder <= dividend;
            done <= 1'b1;
          end else begin
            div_by_zero <= 1'b0;
            rem <= 9'd0;
            quo <= dividend;
            dvs <= divisor;
            steps <= 4'd0;
            busy <= 1'b1;
          end
        end
      end else begin
        if (trial[8]) begin
          rem <= {rem[7:0], quo[7]};
          quo <= {quo[6:0], 1'b0};
        end else begin
          rem <= trial;
          quo <= {quo[6:0], 1'b1};
        end
        steps <= steps + 4'd1;
        if (steps == 4'd7) begin
          busy <= 1'b0;
          done <= 1'b1;
        end
      end
      if (done && !div_by_zero) begin
        quotient <= quo;
        remainder <= rem[7:0];
      end
    end
  end
endmodule
