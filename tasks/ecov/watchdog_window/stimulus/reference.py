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


async def kick_at(dut, cycles):
    await ClockCycles(dut.clk, cycles)
    dut.kick.value = 1
    await RisingEdge(dut.clk)
    dut.kick.value = 0


@cocotb.test()
async def valid_then_early(dut):
    await start(dut, kick=0)
    await kick_at(dut, 14)
    await kick_at(dut, 3)
    await ClockCycles(dut.clk, 3)


@cocotb.test()
async def late_kick(dut):
    await start(dut, kick=0)
    await kick_at(dut, 24)
    await ClockCycles(dut.clk, 3)


@cocotb.test()
async def timeout(dut):
    await start(dut, kick=0)
    await ClockCycles(dut.clk, 40)
