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
async def reset_and_idle(dut):
    await start(dut, init=0, data_valid=0, data=0)
    await ClockCycles(dut.clk, 5)
