module vending_fsm (
    input  logic       clk, rst, cancel,
    input  logic [1:0] coin,
    output logic       vend,
    output logic [5:0] refund, credit
);
  logic [5:0] value, total;
  always_comb begin
    case (coin)
      2'd1: value = 6'd5;
      2'd2: value = 6'd10;
      2'd3: value = 6'd25;
      default: value = 6'd0;
    endcase
    total = credit + value;
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      credit <= 6'd0;
      vend <= 1'b0;
      refund <= 6'd0;
    end else begin
      vend <= 1'b0;
      refund <= 6'd0;
      if (cancel) begin
        refund <= credit;
        credit <= 6'd0;
      end else if (total >= 6'd30) begin
        vend <= 1'b1;
        refund <= total - 6'd30;
        credit <= 6'd0;
      end else begin
        credit <= total;
      end
    end
  end
endmodule
