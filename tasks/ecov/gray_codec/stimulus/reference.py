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
async def both_modes(dut):
    await start(dut, mode=0, din=0)
    for mode in (0, 1):
        dut.mode.value = mode
        for value in (0, 5, 10, 15):
            dut.din.value = value
            await RisingEdge(dut.clk)
