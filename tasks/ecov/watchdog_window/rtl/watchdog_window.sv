module watchdog_window (
    input  logic       clk, rst, kick,
    output logic       fault, early, late,
    output logic [5:0] phase
);
  always_ff @(posedge clk) begin
    if (rst) begin
      phase <= 6'd0;
      fault <= 1'b0;
      early <= 1'b0;
      late <= 1'b0;
    end else if (!fault) begin
      if (kick) begin
        if (phase < 6'd10) begin
          fault <= 1'b1;
          early <= 1'b1;
        end else if (phase <= 6'd20) begin
          phase <= 6'd0;
        end else begin
          fault <= 1'b1;
          late <= 1'b1;
        end
      end else if (phase == 6'd30) begin
        fault <= 1'b1;
        late <= 1'b1;
      end else begin
        phase <= phase + 6'd1;
      end
    end
  end
  // window boundaries (SystemVerilog cover points, collected with --coverage-user)
  cover_kick_first: cover property (@(posedge clk) disable iff (rst) !fault && kick && phase == 6'd10);
  cover_kick_last: cover property (@(posedge clk) disable iff (rst) !fault && kick && phase == 6'd20);
  cover_kick_too_early: cover property (@(posedge clk) disable iff (rst) !fault && kick && phase == 6'd9);
  cover_kick_too_late: cover property (@(posedge clk) disable iff (rst) !fault && kick && phase == 6'd21);
endmodule
