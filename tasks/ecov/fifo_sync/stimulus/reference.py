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
async def fill_drain_overlap(dut):
    await start(dut, push=0, pop=0, din=0)
    dut.pop.value = 1
    await RisingEdge(dut.clk)
    dut.pop.value = 0
    dut.push.value = 1
    for value in range(6):
        dut.din.value = value
        await RisingEdge(dut.clk)
    dut.pop.value = 1
    await ClockCycles(dut.clk, 2)
    dut.push.value = 0
    await ClockCycles(dut.clk, 6)
    dut.pop.value = 0
    await RisingEdge(dut.clk)
