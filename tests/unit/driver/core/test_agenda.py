"""The agenda of an agent's publications or images: deadlines in one array, found due in one native call."""

from __future__ import annotations

import attrs

from driver.core.agenda import Agenda


@attrs.define(eq=False)
class Item:
    name: str
    agenda_index: int = -1


def test_new_items_are_due_at_once_then_when_scheduled() -> None:
    agenda: Agenda[Item] = Agenda()
    a, b, c = Item("a"), Item("b"), Item("c")
    for item in (a, b, c):
        agenda.add(item, entry=item.name)
    assert agenda.due(0) == [0, 1, 2]
    for index, deadline in enumerate((100, 50, 200)):
        agenda.schedule(index, deadline)
    assert agenda.due(49) == []
    assert agenda.due(100) == [0, 1]
    agenda.wake(c)
    assert agenda.due(0) == [2]
    agenda.wake_all()
    assert agenda.due(0) == [0, 1, 2]


def test_removal_moves_the_last_item_into_the_hole_with_its_deadline_and_entry() -> None:
    agenda: Agenda[Item] = Agenda()
    a, b, c = Item("a"), Item("b"), Item("c")
    for item in (a, b, c):
        agenda.add(item, entry=item.name)
    agenda.schedule(2, 7)
    assert agenda.remove(a)
    assert agenda.items == [c, b]
    assert agenda.entries == ["c", "b"]
    assert (c.agenda_index, b.agenda_index, a.agenda_index) == (0, 1, -1)
    assert agenda.due(6) == [1]  # c kept its deadline (7) in its new slot
    assert not agenda.remove(a)
    agenda.wake(a)  # gone: no effect, and no other item woken
    assert agenda.due(6) == [1]
    assert agenda.remove(b)
    assert agenda.remove(c)
    assert len(agenda) == 0
    assert agenda.due(10**18) == []
