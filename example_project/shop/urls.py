from django.urls import path

from shop import views

urlpatterns = [
    path("", views.order_form, name="order_form"),
    path("orders/<int:pk>/resend/", views.resend_confirmation, name="resend_confirmation"),
    path("payments/webhook/", views.payment_webhook, name="payment_webhook"),
]
