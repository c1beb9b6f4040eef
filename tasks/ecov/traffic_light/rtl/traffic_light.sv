module traffic_light (
    input  logic clk, rst, ped_req,
    output logic red, yellow, green, walk
);
  typedef enum logic [1:0] {GREEN, YELLOW, RED} state_t;
  state_t state;
  logic [3:0] timer;
  logic pending;
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= GREEN;
      timer <= 4'd0;
      pending <= 1'b0;
    end else begin
      if (ped_req) pending <= 1'b1;
      case (state)
        GREEN: begin
          if (timer >= 4'd7 && (pending || ped_req)) begin
            state <= YELLOW;
            timer <= 4'd0;
          end else if (timer < 4'd7) begin
            timer <= timer + 4'd1;
          end
        end
        YELLOW: begin
          if (timer == 4'd2) begin
            state <= RED;
            timer <= 4'd0;
            pending <= 1'b0;
          end else timer <= timer + 4'd1;
        end
        default: begin
          if (timer == 4'd5) begin
            state <= GREEN;
            timer <= 4'd0;
          end else timer <= timer + 4'd1;
        end
      endcase
    end
  end
  assign green = (state == GREEN);
  assign yellow = (state == YELLOW);
  assign red = (state == RED);
  assign walk = (state == RED);
endmodule
