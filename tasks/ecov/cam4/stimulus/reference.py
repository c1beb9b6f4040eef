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
async def write_and_search(dut):
    await start(dut, we=0, search=0, waddr=0, wkey=0, skey=0)
    dut.we.value = 1
    for addr, key in ((0, 0x10), (1, 0x20), (2, 0x30), (3, 0x20)):
        dut.waddr.value = addr
        dut.wkey.value = key
        await RisingEdge(dut.clk)
    dut.we.value = 0
    dut.search.value = 1
    for key in (0x10, 0x20, 0x30, 0x99):
        dut.skey.value = key
        await RisingEdge(dut.clk)
    dut.search.value = 0
    await ClockCycles(dut.clk, 2)
