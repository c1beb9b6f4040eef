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
async def schemes_and_errors(dut):
    await start(dut, odd=0, valid=0, check_bit=0, data=0)
    dut.valid.value = 1
    for odd, data, check in ((0, 0x03, 0), (0, 0x07, 0), (1, 0x01, 0), (1, 0x03, 0)):
        dut.odd.value = odd
        dut.data.value = data
        dut.check_bit.value = check
        await RisingEdge(dut.clk)
    dut.valid.value = 0
    await ClockCycles(dut.clk, 2)
