module timer_prescaler (
    input  logic       clk, rst, enable, auto_reload, irq_clear,
    input  logic [3:0] prescale,
    input  logic [7:0] compare,
    output logic [7:0] count,
    output logic       irq
);
  logic [3:0] pre;
  logic stopped;
  always_ff @(posedge clk) begin
    if (rst) begin
      pre <= 4'd0;
      count <= 8'd0;
      irq <= 1'b0;
      stopped <= 1'b0;
    end else begin
      if (irq_clear) irq <= 1'b0;
      if (!enable) begin
        pre <= 4'd0;
        count <= 8'd0;
        stopped <= 1'b0;
      end else if (!stopped) begin
        if (pre == prescale) begin
          pre <= 4'd0;
          if (count == compare) begin
            irq <= 1'b1;
            if (auto_reload) count <= 8'd0;
            else stopped <= 1'b1;
          end else begin
            count <= count + 8'd1;
          end
        end else begin
          pre <= pre + 4'd1;
        end
      end
    end
  end
endmodule
