module uart_tx (
    input  logic       clk, rst, start,
    input  logic [7:0] data,
    output logic       tx, busy, done
);
  logic [9:0] frame;
  logic [3:0] bit_idx;
  logic [1:0] tick;
  always_ff @(posedge clk) begin
    if (rst) begin
      busy <= 1'b0;
      done <= 1'b0;
      tx <= 1'b1;
      bit_idx <= 4'd0;
      tick <= 2'd0;
      frame <= 10'h3ff;
    end else begin
      done <= 1'b0;
      if (!busy) begin
        if (start) begin
          frame <= {1'b1, data, 1'b0};
          busy <= 1'b1;
          bit_idx <= 4'd0;
          tick <= 2'd0;
          tx <= 1'b0;
        end
      end else if (tick == 2'd3) begin
        tick <= 2'd0;
        if (bit_idx == 4'd9) begin
          busy <= 1'b0;
          done <= 1'b1;
          tx <= 1'b1;
        end else begin
          bit_idx <= bit_idx + 4'd1;
          tx <= frame[bit_idx + 4'd1];
        end
      end else begin
        tick <= tick + 2'd1;
      end
    end
  end
endmodule
