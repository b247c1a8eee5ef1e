import random

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from django_sqlq import enqueue
from shop.models import Order

ITEMS = ["Rubber duck", "Teapot", "Notebook", "Bicycle bell", "Houseplant", "Kite"]


class Command(BaseCommand):
    help = (
        "Create N sample orders, each with its confirmation job as the order form does, and "
        "a job that marks it paid (shop.mark_order_paid, an atomic handler)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("count", type=int, nargs="?", default=5, help="How many orders.")

    def handle(self, *, count: int, **options: object) -> None:
        for n in range(1, count + 1):
            with transaction.atomic():
                order = Order.objects.create(
                    customer_email=f"customer{n}@example.com",
                    item=random.choice(ITEMS),
                    quantity=random.randint(1, 3),
                )
                job = enqueue("shop.send_order_confirmation", {"order_id": order.pk})
                # As a payment provider's webhook would: an atomic handler marks it paid.
                enqueue("shop.mark_order_paid", {"order_id": order.pk})
            self.stdout.write(f"Order #{order.pk} ({order.item}) -> job #{job.pk}")
        self.stdout.write(self.style.SUCCESS(f"Created {count} orders with confirmation jobs."))
