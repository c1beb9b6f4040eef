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
async def load_and_count(dut):
    await start(dut, en=0, load=0, din=0)
    dut.load.value = 1
    dut.din.value = 0xFD
    await RisingEdge(dut.clk)
    dut.load.value = 0
    dut.en.value = 1
    await ClockCycles(dut.clk, 5)
    dut.en.value = 0
    await ClockCycles(dut.clk, 2)
