"""Placing an order: the order and every job it needs, written in one transaction."""

from django.db import transaction

from django_sqlq import bulk_enqueue, enqueue
from shop.models import Order


def place_order(*, customer_email: str, item: str, quantity: int) -> Order:
    """Create an order with its jobs: the confirmation, one shop.pack_item job per unit,
    and the chain shop.charge_order -> shop.ship_order -> shop.email_receipt, which starts
    once every unit is packed (a fan-in: ``group.then()``).

    The order and its jobs are written in one transaction: if anything fails before the
    commit none of them exists, so the worker never sees a job for a missing order.
    """
    with transaction.atomic():
        order = Order.objects.create(customer_email=customer_email, item=item, quantity=quantity)
        enqueue("shop.send_order_confirmation", {"order_id": order.pk})
        # The units are packed in parallel, by as many workers as are free...
        packing = bulk_enqueue(
            "shop.pack_item",
            [{"order_id": order.pk, "unit": unit} for unit in range(1, quantity + 1)],
        )
        # ...and the order is charged once all of them have completed: this job is written
        # "blocked" and never claimed until then. If a unit cannot be packed (its job fails
        # for good), the charge fails too instead of running (on_dependency_failure="fail").
        packing.then("shop.charge_order", {"order_id": order.pk})
    return order
