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
async def seeds_and_steps(dut):
    await start(dut, seed_we=0, step=0, seed=0)
    dut.seed_we.value = 1
    dut.seed.value = 0xA5
    await RisingEdge(dut.clk)
    dut.seed_we.value = 0
    dut.step.value = 1
    await ClockCycles(dut.clk, 40)
    dut.step.value = 0
    dut.seed_we.value = 1
    dut.seed.value = 0
    await RisingEdge(dut.clk)
    dut.seed_we.value = 0
    await ClockCycles(dut.clk, 2)
