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
async def saturate_both_ways(dut):
    await start(dut, en=0, up=1)
    dut.en.value = 1
    dut.up.value = 1
    await ClockCycles(dut.clk, 18)
    dut.up.value = 0
    await ClockCycles(dut.clk, 18)
