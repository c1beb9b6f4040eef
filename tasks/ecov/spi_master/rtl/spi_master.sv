module spi_master (
    input  logic       clk, rst, start, cpol, miso,
    input  logic [7:0] tx_data,
    output logic       sclk, mosi, cs_n, busy, done,
    output logic [7:0] rx_data
);
  logic [7:0] shreg;
  logic [3:0] bits;
  logic div, lead, mode;
  always_ff @(posedge clk) begin
    if (rst) begin
      busy <= 1'b0;
      done <= 1'b0;
      cs_n <= 1'b1;
      sclk <= 1'b0;
      mosi <= 1'b0;
      div <= 1'b0;
      lead <= 1'b1;
      bits <= 4'd0;
      rx_data <= 8'd0;
      mode <= 1'b0;
    end else begin
      done <= 1'b0;
      if (!busy) begin
        sclk <= cpol;
        if (start) begin
          busy <= 1'b1;
          cs_n <= 1'b0;
          mode <= cpol;
          shreg <= tx_data;
          mosi <= tx_data[7];
          bits <= 4'd0;
          div <= 1'b0;
          lead <= 1'b1;
        end
      end else begin
        div <= ~div;
        if (div) begin
          sclk <= ~sclk;
          lead <= ~lead;
          if (lead) begin
            rx_data <= {rx_data[6:0], miso};
          end else begin
            shreg <= {shreg[6:0], 1'b0};
            mosi <= shreg[6];
            bits <= bits + 4'd1;
            if (bits == 4'd7) begin
              busy <= 1'b0;
              done <= 1'b1;
              cs_n <= 1'b1;
              sclk <= mode;
            end
          end
        end
      end
    end
  end
endmodule
