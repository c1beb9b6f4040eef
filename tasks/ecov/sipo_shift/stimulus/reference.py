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
async def shift_a_byte(dut):
    await start(dut, shift_en=0, sin=0)
    dut.shift_en.value = 1
    for bit in [1, 0, 1, 1, 0, 0, 1, 0, 1]:
        dut.sin.value = bit
        await RisingEdge(dut.clk)
    dut.shift_en.value = 0
    await ClockCycles(dut.clk, 2)
