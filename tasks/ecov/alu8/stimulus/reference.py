import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, FallingEdge, Timer


async def start(dut, **idle):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for name, value in idle.items():
        getattr(dut, name).value = value
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


@cocotb.test()
async def every_op(dut):
    await start(dut, valid=0, op=0, a=0, b=0)
    dut.valid.value = 1
    cases = [(0, 100, 100), (0, 200, 100), (1, 5, 5), (1, 0x80, 1), (2, 0xF0, 0x3C),
             (3, 0x0F, 0xF0), (4, 0xFF, 0x0F), (5, 0x81, 0), (6, 0x03, 0), (7, 3, 9), (7, 9, 9)]
    for op, a, b in cases:
        dut.op.value = op
        dut.a.value = a
        dut.b.value = b
        await RisingEdge(dut.clk)
    dut.valid.value = 0
    await ClockCycles(dut.clk, 2)
