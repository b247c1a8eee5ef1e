from django.urls import path

from shop import views

urlpatterns = [
    path("", views.order_form, name="order_form"),
]
