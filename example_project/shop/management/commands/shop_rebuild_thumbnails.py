from django.core.management.base import BaseCommand, CommandParser

from django_sqlq import enqueue


class Command(BaseCommand):
    help = (
        "Enqueue a long job that reports its progress (shop.rebuild_thumbnails): watch its "
        "bar in the admin's dashboard and job page, and cancel it there while it runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--images", type=int, default=100, help="How many images.")
        parser.add_argument(
            "--seconds-each", type=float, default=0.2, help="Time per image (seconds)."
        )

    def handle(self, *, images: int, seconds_each: float, **options: object) -> None:
        job = enqueue("shop.rebuild_thumbnails", {"images": images, "seconds_each": seconds_each})
        self.stdout.write(
            f"Job #{job.pk}: {images} images, about {images * seconds_each:.0f}s. Watch it "
            f"at /admin/django_sqlq/job/{job.pk}/change/ and cancel it there."
        )
