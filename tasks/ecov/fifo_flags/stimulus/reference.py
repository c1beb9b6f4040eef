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


async def cycle(dut, push, pop, din=0):
    dut.push.value = push
    dut.pop.value = pop
    dut.din.value = din
    await RisingEdge(dut.clk)


@cocotb.test()
async def corners(dut):
    await start(dut, push=0, pop=0, din=0)
    await cycle(dut, 0, 1)          # underflow
    await cycle(dut, 1, 1, 0x11)    # push+pop on empty: bypass
    for value in range(5):          # fill, then overflow
        await cycle(dut, 1, 0, value)
    await cycle(dut, 1, 1, 0x22)    # push+pop on full
    for _ in range(5):
        await cycle(dut, 0, 1)
    await cycle(dut, 0, 0)
