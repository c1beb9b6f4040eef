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


async def insert(dut, coins, cancel=False):
    for c in coins:
        dut.coin.value = c
        await RisingEdge(dut.clk)
    dut.coin.value = 0
    if cancel:
        dut.cancel.value = 1
        await RisingEdge(dut.clk)
        dut.cancel.value = 0
    await RisingEdge(dut.clk)


@cocotb.test()
async def buy_and_cancel(dut):
    await start(dut, coin=0, cancel=0)
    await insert(dut, [3, 1])
    await insert(dut, [2, 2, 3])
    await insert(dut, [1, 2], cancel=True)
    await ClockCycles(dut.clk, 2)
