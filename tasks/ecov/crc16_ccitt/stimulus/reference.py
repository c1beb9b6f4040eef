import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.init.value = 0
    dut.data_valid.value = 0
    dut.data.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


async def send_byte(dut, value):
    """Offer one byte for one cycle, then wait until it has been folded in."""
    dut.data.value = value
    dut.data_valid.value = 1
    await FallingEdge(dut.clk)
    dut.data_valid.value = 0
    while int(dut.busy.value):
        await FallingEdge(dut.clk)


async def pulse(dut, name):
    getattr(dut, name).value = 1
    await FallingEdge(dut.clk)
    getattr(dut, name).value = 0


@cocotb.test()
async def check_value_and_residue(dut):
    await start(dut)
    for byte in b"123456789":
        await send_byte(dut, byte)
    assert int(dut.crc.value) == 0x29B1
    for byte in (0x29, 0xB1):  # message followed by its CRC leaves 0
        await send_byte(dut, byte)
    assert int(dut.zero.value) == 1
    for byte in (0x00, 0xFF, 0xA5, 0x5A):
        await send_byte(dut, byte)
    await pulse(dut, "init")
    assert int(dut.crc.value) == 0xFFFF


@cocotb.test()
async def overrun_and_abort(dut):
    await start(dut)
    dut.data.value = 0x3C
    dut.data_valid.value = 1          # held high: bytes offered while busy are dropped
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.data_valid.value = 0
    await ClockCycles(dut.clk, 10)
    assert int(dut.overrun.value) == 1
    await send_byte(dut, 0x81)
    dut.data.value = 0x42
    dut.data_valid.value = 1
    await FallingEdge(dut.clk)
    dut.data_valid.value = 0
    await ClockCycles(dut.clk, 3)
    await FallingEdge(dut.clk)
    await pulse(dut, "init")          # abort a byte in progress
    assert int(dut.busy.value) == 0 and int(dut.overrun.value) == 0
    await ClockCycles(dut.clk, 2)
