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
async def rotate(dut):
    await start(dut, req=0)
    for req in (0b1111, 0b1111, 0b1111, 0b1111, 0b1010, 0b0101, 0b1000, 0b0000, 0b0001):
        dut.req.value = req
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 2)
