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
async def write_read_bypass(dut):
    await start(dut, we=0, waddr=0, wdata=0, raddr_a=0, raddr_b=0)
    dut.we.value = 1
    for addr in (0, 1, 2, 3):
        dut.waddr.value = addr
        dut.wdata.value = 0x11 * (addr + 1)
        dut.raddr_a.value = addr
        dut.raddr_b.value = (addr + 1) % 4
        await RisingEdge(dut.clk)
    for addr in (3, 2, 1, 0):       # port B forwards the word being written
        dut.waddr.value = addr
        dut.wdata.value = 0xFF if addr % 2 else 0x00
        dut.raddr_b.value = addr
        dut.raddr_a.value = (addr + 2) % 4
        await RisingEdge(dut.clk)
    dut.we.value = 0
    for addr in (0, 1, 2, 3):
        dut.raddr_a.value = addr
        dut.raddr_b.value = 3 - addr
        await RisingEdge(dut.clk)
