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


async def keys(dut, sequence):
    for k in sequence:
        dut.key_valid.value = 1
        dut.key.value = k
        await RisingEdge(dut.clk)
    dut.key_valid.value = 0
    await RisingEdge(dut.clk)


@cocotb.test()
async def open_the_lock(dut):
    await start(dut, key_valid=0, key=0)
    await keys(dut, [3, 1, 3, 1, 4, 1])
    await ClockCycles(dut.clk, 2)


@cocotb.test()
async def lock_out(dut):
    await start(dut, key_valid=0, key=0)
    await keys(dut, [7, 7, 7, 3, 1, 4, 1])
    await ClockCycles(dut.clk, 2)
