module uart_rx (
    input  logic       clk, rst, rx,
    output logic [7:0] data,
    output logic       valid, frame_err
);
  typedef enum logic [1:0] {IDLE, START, DATA, STOP} state_t;
  state_t state;
  logic [1:0] tick;
  logic [2:0] idx;
  logic [7:0] shreg;
  logic rx_q;
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= IDLE;
      valid <= 1'b0;
      frame_err <= 1'b0;
      data <= 8'd0;
      rx_q <= 1'b1;
      tick <= 2'd0;
      idx <= 3'd0;
    end else begin
      rx_q <= rx;
      valid <= 1'b0;
      frame_err <= 1'b0;
      case (state)
        IDLE: if (rx_q && !rx) begin
          state <= START;
          tick <= 2'd0;
        end
        START: begin
          if (tick == 2'd1) begin
            if (rx) state <= IDLE;
            else begin
              state <= DATA;
              tick <= 2'd0;
              idx <= 3'd0;
            end
          end else tick <= tick + 2'd1;
        end
        DATA: begin
          if (tick == 2'd3) begin
            tick <= 2'd0;
            shreg <= {rx, shreg[7:1]};
            if (idx == 3'd7) state <= STOP;
            idx <= idx + 3'd1;
          end else tick <= tick + 2'd1;
        end
        default: begin
          if (tick == 2'd3) begin
            state <= IDLE;
            if (rx) begin
              valid <= 1'b1;
              data <= shreg;
            end else frame_err <= 1'b1;
          end else tick <= tick + 2'd1;
        end
      endcase
    end
  end
endmodule
