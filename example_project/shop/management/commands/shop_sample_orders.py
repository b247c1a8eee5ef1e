import random

from django.core.management.base import BaseCommand, CommandParser

from shop.orders import place_order

ITEMS = ["Rubber duck", "Teapot", "Notebook", "Bicycle bell", "Houseplant", "Kite"]


class Command(BaseCommand):
    help = (
        "Create N sample orders as the order form does, each with its jobs: the confirmation, "
        "one shop.pack_item per unit, then the chain shop.charge_order (waits for the payment) -> "
        "shop.ship_order -> shop.email_receipt once every unit is packed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("count", type=int, nargs="?", default=5, help="How many orders.")

    def handle(self, *, count: int, **options: object) -> None:
        for n in range(1, count + 1):
            order = place_order(
                customer_email=f"customer{n}@example.com",
                item=random.choice(ITEMS),
                quantity=random.randint(1, 3),
            )
            self.stdout.write(f"Order #{order.pk}: {order.quantity} x {order.item}")
        self.stdout.write(
            self.style.SUCCESS(
                f"Created {count} orders: a confirmation, packing jobs and a charge -> ship -> "
                "receipt chain each."
            )
        )
