from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return self.item
